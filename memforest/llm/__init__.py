"""The model runtime: protocols, backends, the wave scheduler and the call log."""

from memforest.llm.base import ChatModel, ChatRequest, ChatResponse, Embedder, Usage
from memforest.llm.calllog import CallLog, CallRecord, format_summary, summarize
from memforest.llm.factory import build_chat_model, build_embedder
from memforest.llm.scheduler import Scheduler

__all__ = [
    "CallLog", "CallRecord", "ChatModel", "ChatRequest", "ChatResponse", "Embedder", "Scheduler",
    "Usage", "build_chat_model", "build_embedder", "format_summary", "summarize",
]
