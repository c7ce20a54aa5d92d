"""Video tools for multi-turn rollouts (get_frames, zoom) over the frame store."""
