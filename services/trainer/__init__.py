"""The trainer as a Ray job: the RL driver (``python -m services.trainer.entrypoint``) with its
FSDP ranks as Ray actors in one placement group (:mod:`services.trainer.ray_actors`)."""
