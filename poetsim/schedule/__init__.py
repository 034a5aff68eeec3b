"""Schedules: the executable op list (compute, page-out, page-in, free, and the read,
write-back and hold of weights on storage) every part shares.

* :mod:`poetsim.schedule.ops`: :class:`Step`, :class:`Schedule` and the contract;
* :mod:`poetsim.schedule.check`: the independent checker and the plain schedule;
* :mod:`poetsim.schedule.io`: JSON schedule files and the compact binary form.
"""

from poetsim.schedule.check import (
    RULES,
    CheckResult,
    ScheduleError,
    Violation,
    check_schedule,
    check_schedule_or_raise,
    plain_schedule,
)
from poetsim.schedule.io import (
    ScheduleFileError,
    decode_binary,
    encode_binary,
    read_schedule,
    read_schedule_binary,
    schedule_from_dict,
    schedule_to_dict,
    write_schedule,
    write_schedule_binary,
)
from poetsim.schedule.ops import Action, Schedule, Step

__all__ = [
    "RULES", "Action", "CheckResult", "Schedule", "ScheduleError", "ScheduleFileError", "Step",
    "Violation", "check_schedule", "check_schedule_or_raise", "decode_binary", "encode_binary",
    "plain_schedule", "read_schedule", "read_schedule_binary", "schedule_from_dict",
    "schedule_to_dict", "write_schedule", "write_schedule_binary",
]
