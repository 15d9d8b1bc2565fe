"""Reinforcement learning over the simulator (a Brax environment)."""
