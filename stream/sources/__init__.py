"""How far this worker has read each source partition, and the wait for other workers'
reports after a recovery: one room below the thread processor (``threads/``) and the span
assembly (``otlp/``), which both close by it, and the Kafka mends that read Faust's state
for it (``kafka/mends/faust_state.py``).

- ``log.py``: ``SourceLog``, the last message read of each source and the position that
  gives it (event time, Kafka time read up to), reported on every worker's timer;
- ``wait.py``: ``ReportWait``, after a recovery the sources no report has named yet taken
  as unread for a while, then as read (said once in the log).
"""
