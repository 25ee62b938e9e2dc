from baselines.lightmem.system import lightmem_system

__all__ = ["lightmem_system"]
