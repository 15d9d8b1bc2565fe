"""The world axis over the one-world pipeline: `Simulation`, layout on devices, sub-batches, host
chunks, the watchdog and the open-loop backends."""
