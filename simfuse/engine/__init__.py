from .simulation import Record, Recorder, Simulation

__all__ = ['Record', 'Recorder', 'Simulation']
