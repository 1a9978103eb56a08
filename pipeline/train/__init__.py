"""Training: the resource planner, the Ray Train job and the per-worker loop."""

from pipeline.train.config import TrainConfig
from pipeline.train.models import MODELS, build_model
from pipeline.train.planner import PlanError, ResourcePlan, plan_resources

__all__ = ["MODELS", "PlanError", "ResourcePlan", "TrainConfig", "build_model", "plan_resources"]
