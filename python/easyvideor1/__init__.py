"""easyvideor1: RL with verifiable rewards for video understanding on VLMs."""

__version__ = "0.1.0"
