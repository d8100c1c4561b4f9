"""Conversation threads and coaching sessions: pure state (folding turns, closing, the close
record), the thread-events wire format, the router that turns traces and session events into
thread events, and the processor that keeps the thread table and decides closes. No Faust
here: the agent that runs the processor is ``stream.agents.threads``."""
