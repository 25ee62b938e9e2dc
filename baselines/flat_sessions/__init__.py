from baselines.flat_sessions.system import FlatSessionsSystem

__all__ = ["FlatSessionsSystem"]
