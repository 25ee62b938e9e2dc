from baselines.zep_local.system import ZepLocalSystem

__all__ = ["ZepLocalSystem"]
