from baselines.evermemos.system import evermemos_system

__all__ = ["evermemos_system"]
