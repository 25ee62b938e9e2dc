from baselines.full_context.system import FullContextSystem

__all__ = ["FullContextSystem"]
