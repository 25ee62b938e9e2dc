from baselines.memforest_method.system import MemForestSystem

__all__ = ["MemForestSystem"]
