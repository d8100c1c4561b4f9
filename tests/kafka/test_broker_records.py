"""Each embedded broker's record of its address is its own: written and removed by the process
that runs it, stale ones passed over and removed, and with several running a command is told
which to use rather than guessing (no broker started: the records are what is tested)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from stream.cli.base import ask_which_broker, scores_broker
from stream.errors import ConfigError
from stream.kafka import broker
from stream.kafka.broker import EmbeddedBroker, broker_in_use, records_dir, running_brokers
from stream.kafka.security import KafkaSecurity
from stream.settings import Settings


@pytest.fixture(autouse=True)
def own_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)


@pytest.fixture
def listening() -> Iterator[list[int]]:
    """Ports something listens on, as running brokers' (three)."""
    sockets = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        sockets.append(s)
    yield [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()


def dead_pid() -> int:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(gone.stdout)


def by_port(addresses: Iterable[str]) -> list[str]:
    return sorted(addresses, key=lambda address: int(address.rpartition(":")[2]))


def recorded(port: int) -> EmbeddedBroker:
    """A broker on ``port`` as this process records it (not started: the record is the test)."""
    return EmbeddedBroker(port).record()


def test_each_broker_has_a_record_of_its_own(listening: list[int]) -> None:
    first, second = recorded(listening[0]), recorded(listening[1])
    assert sorted(p.name for p in records_dir().iterdir()) == sorted(str(p) for p in listening[:2])
    assert running_brokers() == by_port([first.bootstrap, second.bootstrap])
    assert records_dir().stat().st_mode & 0o077 == 0
    assert records_dir().parent.stat().st_mode & 0o077 == 0


def test_a_broker_stopping_removes_its_record_and_no_other(listening: list[int]) -> None:
    first, second = recorded(listening[0]), recorded(listening[1])
    first_record = (records_dir() / str(first.port)).read_text()
    second.stop()
    assert running_brokers() == [first.bootstrap]
    assert (records_dir() / str(first.port)).read_text() == first_record
    second.stop()  # twice: nothing more
    assert running_brokers() == [first.bootstrap]
    first.stop()
    assert running_brokers() == []


def test_a_record_another_process_wrote_for_the_port_is_left_to_it(listening: list[int]) -> None:
    mine = recorded(listening[0])
    record = records_dir() / str(mine.port)
    theirs = f"{mine.bootstrap} {os.getppid()}\n"  # written since by a live process
    record.write_text(theirs)
    mine.stop()
    assert record.read_text() == theirs


def test_stale_records_are_passed_over_and_removed(listening: list[int]) -> None:
    live = recorded(listening[0])
    records_dir().joinpath(str(listening[1])).write_text(
        f"127.0.0.1:{listening[1]} {dead_pid()}\n"
    )  # its process is gone
    with socket.socket() as bound:  # bound, never listening: nothing answers there
        bound.bind(("127.0.0.1", 0))
        silent = bound.getsockname()[1]
        records_dir().joinpath(str(silent)).write_text(f"127.0.0.1:{silent} {os.getpid()}\n")
        assert running_brokers() == [live.bootstrap]
    assert sorted(p.name for p in records_dir().iterdir()) == [str(live.port)]


def test_what_is_not_a_record_is_left_alone(listening: list[int]) -> None:
    records_dir().mkdir(parents=True)
    being_written = records_dir() / f".{listening[0]}.{os.getpid()}"
    being_written.write_text("127.0.0.1:1")
    unreadable = records_dir() / str(listening[1])
    unreadable.write_text("not a record")
    assert running_brokers() == []
    assert being_written.exists() and unreadable.exists()


def test_the_one_running_broker_is_used_and_the_cluster_comes_first(
    listening: list[int],
) -> None:
    assert broker_in_use(None, KafkaSecurity()) is None
    one = recorded(listening[0])
    assert broker_in_use(None, KafkaSecurity()) == (one.bootstrap, None)
    recorded(listening[1])
    security = KafkaSecurity()
    assert broker_in_use("kafka:9092", security) == ("kafka:9092", security)


def test_with_several_running_there_is_no_guess(listening: list[int]) -> None:
    brokers = by_port(recorded(port).bootstrap for port in listening)
    with pytest.raises(ConfigError) as caught:
        broker_in_use(None, KafkaSecurity())
    assert caught.value.problems == [
        f"3 embedded brokers run on this host ({', '.join(brokers)}): set "
        "KAFKA_BOOTSTRAP_SERVERS to the one to use"
    ]
    assert broker_in_use(None, KafkaSecurity(), lambda found: found[2]) == (brokers[2], None)
    # off a terminal the commands do not ask
    with pytest.raises(ConfigError, match="3 embedded brokers run on this host"):
        scores_broker(Settings())


def test_a_terminal_is_asked_which(listening: list[int]) -> None:
    brokers = [recorded(port).bootstrap for port in listening[:2]]
    app = typer.Typer()

    @app.command()
    def pick() -> None:
        typer.echo(f"picked {ask_which_broker(brokers)}")

    result = CliRunner().invoke(app, [], input="5\n2\n")
    assert result.exit_code == 0, result.output
    assert f"picked {brokers[1]}" in result.output
    assert "5 is not one of 1 to 2" in result.output


def test_the_record_is_whole_before_it_is_seen(
    listening: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    replace = Path.replace

    def watch(self: Path, target: Path) -> Path:  # the moment the record appears
        seen.append(sorted(p.name for p in records_dir().iterdir() if p.name[0] != "."))
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", watch)
    recorded(listening[0])
    assert seen == [[]]
    assert broker.running_brokers() == [f"127.0.0.1:{listening[0]}"]
