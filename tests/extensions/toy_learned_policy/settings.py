"""`training.routing_evaluation.learned.toy_clone`: which heuristic it imitates, and for how long."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from routeforge.core.config import StrictSettings
from routeforge.core.kinds import LEARNED_SETTINGS


@LEARNED_SETTINGS.register("toy_clone")
class ToyCloneSettings(StrictSettings):
    """Behaviour cloning of one heuristic by a small MLP."""

    teacher: Literal["join_shortest_queue", "least_work_left"] = "join_shortest_queue"  # the heuristic imitated
    demo_episodes: int = Field(2, ge=1)  # episodes of the teacher's decisions it is fitted on
    steps: int = Field(300, ge=1)  # Adam updates of the cross-entropy toward the teacher's action
    hidden: int = Field(32, ge=1)  # width of the MLP's two hidden layers
    learning_rate: float = Field(3e-3, gt=0)  # Adam's learning rate
    seed: int = 0  # seed of the network, the demonstrations and the batches
