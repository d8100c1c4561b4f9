"""Kafka plumbing: the embedded broker's process (``broker.py``), the CLI's plain clients
(``io.py``), TLS and SASL (``security.py``), reads by time and back by offset
(``time_range.py``, ``lookback.py``), the data directory's lock (``data_dir.py``); and, in a
room of its own, every override of Faust's, aiokafka's and rocksdict's internals
(``mends/``, indexed in ``docs/upstream/README.md``)."""
