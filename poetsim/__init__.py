"""poetsim: energy-optimal rematerialization and paging schedules for training on edge boards."""

__version__ = "0.1.0"
