"""The plan report: how many examples or seeds a study needs, from a pilot (``routestats plan``)."""

from routestats.compose.plan.build import PlanQuestion, build_plan_report, plan

__all__ = ["PlanQuestion", "build_plan_report", "plan"]
