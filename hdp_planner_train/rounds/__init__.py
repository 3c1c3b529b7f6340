"""The round loop with hooks, driven by the simulator's trainers and the Flower strategy alike."""
