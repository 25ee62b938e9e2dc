from baselines.mempalace.system import MemPalaceSystem

__all__ = ["MemPalaceSystem"]
