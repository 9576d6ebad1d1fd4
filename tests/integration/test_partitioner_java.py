"""Our partition for a loop id is the one a Java (or Go) producer picks.

A command must be read from the partition its key belongs to, or it is dead-lettered
as ``misrouted``; a producer in another language keyed by loop id must therefore land
where :func:`turnstream.kafka.records.partition_for` says. This test asks Kafka's own
Java client code (``Utils.murmur2`` / ``toPositive``, the default partitioner's hash,
from the broker jars the project fetches) for the partitions of many keys and
compares.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from turnstream.devbroker import BrokerSettings
from turnstream.kafka.records import loop_key, partition_for

pytestmark = [pytest.mark.kafka]

PROJECT_DIR = Path(__file__).resolve().parents[2]

_JAVA = """
import org.apache.kafka.common.utils.Utils;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;

public class Partitions {
    public static void main(String[] args) throws Exception {
        int[] counts = {1, 3, 7, 12, 50};
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            byte[] key = line.getBytes(StandardCharsets.UTF_8);
            StringBuilder out = new StringBuilder();
            for (int n : counts) {
                out.append(Utils.toPositive(Utils.murmur2(key)) % n).append(' ');
            }
            System.out.println(out.toString().trim());
        }
    }
}
"""


def test_partition_for_agrees_with_the_java_client(tmp_path: Path) -> None:
    """2,000 loop-id keys (and odd lengths): same partition as Java's, for 5 counts."""
    java = shutil.which("java")
    libs = BrokerSettings.for_project(PROJECT_DIR, {}).libs_dir
    if java is None or not any(libs.glob("kafka-clients-*.jar")):
        pytest.fail("needs java and the broker jars (make jars)")
    keys = [str(uuid.uuid4()) for _ in range(2_000)]
    keys += ["a", "ab", "abc", "abcd", "abcde", str(uuid.uuid4()).upper()]
    (tmp_path / "keys.txt").write_text("\n".join(keys) + "\n")
    source = tmp_path / "Partitions.java"
    source.write_text(_JAVA)
    done = subprocess.run(  # noqa: S603 - our own program, our own inputs
        [java, "-cp", f"{libs}/*", str(source), str(tmp_path / "keys.txt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = done.stdout.split("\n")[: len(keys)]
    for key, row in zip(keys, rows, strict=True):
        expected = [int(p) for p in row.split()]
        ours = [partition_for(key.encode(), n) for n in (1, 3, 7, 12, 50)]
        assert ours == expected, key
    # A loop id's key is its canonical text: what a Java producer keyed by
    # `loopId.toString()` sends.
    loop_id = uuid.UUID(keys[0])
    assert loop_key(loop_id) == keys[0].encode()
