"""Reinforcement learning over the simulator: a Brax environment (`env`), devices on MuJoCo
Playground environments (`playground`, the `playground` extra) and the device pipeline on
PyTorch tensors (`torch_bridge`, the `torch` extra); the optional modules are imported by name."""
