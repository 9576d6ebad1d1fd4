"""Per-span CPU of the OTLP export: SDK span, protobuf encoding, HTTP post to Jaeger.

python bench/lab/profile_otlp_encode.py (no broker; needs make jaeger's binary).
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, ".")
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from tests.support.jaeger import jaeger_binary, running_jaeger

from turnstream.tracing import SpanRecord, TracingSettings
from turnstream.tracing.otlp import OtlpSink

N = 6000
attrs = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "m",
    "gen_ai.usage.input_tokens": 3,
    "gen_ai.usage.output_tokens": 4,
}
recs = [
    SpanRecord("chat m", 1234567 + i, 99 + i, 7, 1, 2, dict(attrs), client=True)
    for i in range(N)
]
sink = OtlpSink(TracingSettings(endpoint="http://127.0.0.1:1"))
t = time.process_time()
sdk = [sink._sdk(r) for r in recs]
print("sdk", (time.process_time() - t) / N * 1e6)
t = time.process_time()
for i in range(0, N, 512):
    encode_spans(sdk[i : i + 512]).SerializeToString()
print("encode", (time.process_time() - t) / N * 1e6)
with tempfile.TemporaryDirectory() as d, running_jaeger(jaeger_binary(), Path(d)) as j:
    ex = OTLPSpanExporter(endpoint=j.otlp_endpoint + "/v1/traces")
    t = time.process_time()
    for i in range(0, N, 512):
        ex.export(sdk[i : i + 512])
    print("export(encode+http)", (time.process_time() - t) / N * 1e6)
sink.close()
