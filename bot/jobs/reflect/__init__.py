"""The reflect job: keeps each user's profile, the agent's soul and the user's
constraints current from what was said, on a schedule."""

from bot.jobs.reflect.reflector import (
    REFLECT_ACTIONS,
    CycleReport,
    ReflectConfig,
    Reflector,
    SessionOutcome,
    TurnRunner,
    slot_of,
)
from bot.jobs.reflect.schedule import run_forever, schedule_reflect

__all__ = [
    "REFLECT_ACTIONS",
    "CycleReport",
    "ReflectConfig",
    "Reflector",
    "SessionOutcome",
    "TurnRunner",
    "run_forever",
    "schedule_reflect",
    "slot_of",
]
