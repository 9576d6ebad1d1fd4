"""The local development broker: Apache Kafka 4.x (KRaft) run from jars.

A table of contents. ``DevBroker`` fetches the broker jars from Maven Central into
``infra/kafka/.cache/libs``, renders ``server.properties`` and formats storage under
``var/kafka/``, starts ``kafka.Kafka`` as a detached JVM and waits until a
caller-supplied readiness probe (an admin call) succeeds; ``down`` stops it.
``DevCluster`` runs N such nodes (default 3, ports 29192-29197, ``var/kafka-cluster``)
with one static quorum and replication factor 3, beside the single node.
``devbroker.secure`` turns a node's settings into a SASL_SSL + SCRAM + ACL broker
(``make_certificate``, ``secure_broker_settings``; the secured test lane's).

Everything here is stdlib-only and runs subprocesses: this package must not import
aiokafka (the probe that speaks Kafka lives in ``turnstream.kafka.admin.probe``;
the CLI and the test fixture compose the two).
"""

from turnstream.devbroker.cluster import (
    CLUSTER_CONTROLLER_PORT_ENV,
    CLUSTER_PORT_ENV,
    ClusterSettings,
    ClusterStatus,
    DevCluster,
)
from turnstream.devbroker.errors import (
    BrokerConfigChangedError,
    BrokerError,
    BrokerExitedError,
    BrokerNotReadyError,
    BrokerStopError,
    EphemeralPortError,
    JarFetchError,
    JavaNotFoundError,
    MavenNotFoundError,
    PortInUseError,
    StorageFormatError,
)
from turnstream.devbroker.jars import JarCache, ensure_jars, jars_are_complete
from turnstream.devbroker.manager import (
    BrokerState,
    BrokerStatus,
    DevBroker,
    Progress,
    ReadinessProbe,
)
from turnstream.devbroker.properties import render_server_properties, server_properties
from turnstream.devbroker.settings import (
    CONTROLLER_PORT_ENV,
    PORT_ENV,
    BrokerSettings,
    find_project_dir,
)

__all__ = [
    "CLUSTER_CONTROLLER_PORT_ENV",
    "CLUSTER_PORT_ENV",
    "CONTROLLER_PORT_ENV",
    "PORT_ENV",
    "BrokerConfigChangedError",
    "BrokerError",
    "BrokerExitedError",
    "BrokerNotReadyError",
    "BrokerSettings",
    "BrokerState",
    "BrokerStatus",
    "BrokerStopError",
    "ClusterSettings",
    "ClusterStatus",
    "DevBroker",
    "DevCluster",
    "EphemeralPortError",
    "JarCache",
    "JarFetchError",
    "JavaNotFoundError",
    "MavenNotFoundError",
    "PortInUseError",
    "Progress",
    "ReadinessProbe",
    "StorageFormatError",
    "ensure_jars",
    "find_project_dir",
    "jars_are_complete",
    "render_server_properties",
    "server_properties",
]
