"""Reinforcement learning over the simulator: one env class (`env.FibrilEnv`, built from a
manifest or, with the `playground` extra, from a MuJoCo Playground env by
`playground.from_playground`), one set of wrappers (`wrappers`), per-episode device draws
(`randomize`) and the device pipeline on PyTorch tensors (`torch_bridge`, the `torch` extra);
the optional modules are imported by name."""
