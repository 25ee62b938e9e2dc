from baselines.flat_rag.system import FlatRAGSystem

__all__ = ["FlatRAGSystem"]
