"""The fault-injecting S3 proxy (tools/fault_proxy.py) against the local S3 server: transparent without faults
(boto3 single and multipart uploads, pyarrow's S3 filesystem), throttling at its seeded share with matching counts,
resets that cut a response's body, stalls that outlast a client's timeout, and the same faults for the same seed."""

from __future__ import annotations

import http.client
import os
import socket
import time

import pytest

from tools.fault_proxy import FaultProxy, Faults, request_key
from tools.local_s3 import create_bucket

boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # noqa: E402
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError, ResponseStreamingError  # noqa: E402
from urllib3.exceptions import ProtocolError  # noqa: E402


def _client(endpoint: str, read_timeout_s: float = 10):
    """boto3 without retries: every fault reaches the test."""
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1}, read_timeout=read_timeout_s,
                                      connect_timeout=5))


def test_without_faults_the_proxy_is_transparent(s3_server, s3_bucket):
    import pyarrow.fs as pafs
    from boto3.s3.transfer import TransferConfig

    bucket = s3_bucket.removeprefix("s3://")
    small, large = os.urandom(300_000), os.urandom(11 << 20)
    with FaultProxy(s3_server) as proxy:
        s3 = _client(proxy.endpoint)
        s3.put_object(Bucket=bucket, Key="a/small.bin", Body=small)
        assert s3.get_object(Bucket=bucket, Key="a/small.bin")["Body"].read() == small
        assert s3.head_object(Bucket=bucket, Key="a/small.bin")["ContentLength"] == len(small)
        parts = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)  # 3 parts of an upload
        s3.upload_fileobj(__import__("io").BytesIO(large), bucket, "a/large.bin", Config=parts)
        assert s3.get_object(Bucket=bucket, Key="a/large.bin")["Body"].read() == large

        fs = pafs.S3FileSystem(endpoint_override=proxy.endpoint.removeprefix("http://"), scheme="http",
                               region="us-east-1", retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
        listed = fs.get_file_info(pafs.FileSelector(f"{bucket}/a"))
        assert sorted((i.base_name, i.size) for i in listed) == [("large.bin", len(large)), ("small.bin", len(small))]
        with fs.open_input_file(f"{bucket}/a/large.bin") as fh:  # ranged reads
            fh.seek(7 << 20)
            assert fh.read(1000) == large[7 << 20:(7 << 20) + 1000]
        with fs.open_output_stream(f"{bucket}/a/arrow.bin") as fh:
            fh.write(small)
        assert s3.get_object(Bucket=bucket, Key="a/arrow.bin")["Body"].read() == small
        counts = proxy.counts()
    assert counts["requests"] >= 10 and counts["slow_down"] == counts["reset"] == counts["stall"] == 0


def test_a_seeded_share_of_requests_is_throttled_and_counted(s3_server):
    bucket = "a-seeded-share"  # a fixed name: the draws hash the request's path (the s3_bucket fixture's hold the pid)
    create_bucket(s3_server, bucket)
    _client(s3_server).put_object(Bucket=bucket, Key="k", Body=b"x" * 1000)
    with FaultProxy(s3_server, Faults(seed=3, slow_down=0.25, methods=("GET",))) as proxy:
        s3 = _client(proxy.endpoint)
        throttled = 0
        for _ in range(120):
            try:
                assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x" * 1000
            except ClientError as err:
                assert err.response["Error"]["Code"] == "SlowDown"
                assert err.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                throttled += 1
        s3.put_object(Bucket=bucket, Key="k2", Body=b"y")  # not a GET: never throttled
        counts = proxy.counts()
    assert counts == {"requests": 121, "slow_down": throttled, "reset": 0, "stall": 0}
    assert 0.15 * 120 <= throttled <= 0.35 * 120  # 0.25 ± 2.5 standard deviations


def test_a_reset_cuts_the_body_with_an_rst(s3_server, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    body = os.urandom(200_000)
    with FaultProxy(s3_server, Faults(reset=1.0, methods=("GET",))) as proxy:
        s3 = _client(proxy.endpoint)
        s3.put_object(Bucket=bucket, Key="k", Body=body)
        response = s3.get_object(Bucket=bucket, Key="k")  # the head arrives whole
        assert response["ContentLength"] == len(body)
        with pytest.raises(ResponseStreamingError):
            response["Body"].read()
        # on the wire: the status line, the headers and half the body, then a reset instead of an orderly close
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            target = url.removeprefix(proxy.endpoint)
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n\r\n".encode())
            received = b""
            with pytest.raises(ConnectionResetError):
                while piece := sock.recv(65536):
                    received += piece
        head, _, partial = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and partial == body[:len(body) // 2]
        assert proxy.counts() == {"requests": 3, "slow_down": 0, "reset": 2, "stall": 0}


def test_a_stall_outlasts_the_client_timeout_and_stop_ends_it(s3_server, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    with FaultProxy(s3_server, Faults(stall=1.0, stall_s=0.4)) as proxy:
        with pytest.raises(ReadTimeoutError):
            _client(proxy.endpoint, read_timeout_s=0.2).put_object(Bucket=bucket, Key="late", Body=b"z")
        time.sleep(0.5)  # the stall ends with the client gone
    with pytest.raises(ClientError, match="404"):  # so the PUT was dropped, not stored behind the client's back
        _client(s3_server).head_object(Bucket=bucket, Key="late")

    with FaultProxy(s3_server, Faults(stall=1.0, stall_s=30)) as proxy:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        conn.request("GET", f"/{bucket}/late")
        while proxy.counts()["stall"] < 1 and time.monotonic() - started < 5:  # the proxy holds it ...
            time.sleep(0.01)
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):  # ... until it stops: closed, unanswered
        conn.getresponse()
    assert time.monotonic() - started < 5 and proxy.counts() == {"requests": 1, "slow_down": 0, "reset": 0,
                                                                 "stall": 1}


def test_the_same_seed_gives_the_same_faults(s3_server):
    # a bucket of a fixed name: the draws hash the request's path, and the s3_bucket fixture's names hold the pid
    # (one session in about 200 drew no 503 for seed 7 in the pid's bucket)
    bucket = "same-seed-same-faults"
    create_bucket(s3_server, bucket)
    _client(s3_server).put_object(Bucket=bucket, Key="k", Body=b"w" * 100)

    def faults_of(seed: int) -> list:
        with FaultProxy(s3_server, Faults(seed=seed, slow_down=0.2, reset=0.2)) as proxy:
            s3 = _client(proxy.endpoint)
            for key in ["k", "missing", "k", "k", "k", "missing", "k", "k"] * 3:
                try:
                    s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                except (ClientError, BotoCoreError, ProtocolError):  # a reset error body breaks inside boto3
                    pass
        return proxy.events()

    first = faults_of(7)
    assert first == faults_of(7)
    assert {fault for _, _, fault in first} == {None, "slow_down", "reset"}
    assert [fault for *_, fault in faults_of(8)] != [fault for *_, fault in first]


def test_the_request_key_drops_the_random_upload_id():
    assert request_key("/b/k?uploadId=XYZ&partNumber=2") == request_key("/b/k?partNumber=2&uploadId=ABC") == \
        "/b/k?partNumber=2"
    with pytest.raises(ValueError, match="sum to at most 1"):
        Faults(slow_down=0.6, reset=0.6)


def test_faults_can_be_aimed_at_some_keys():
    """``keys`` aims faults at matching requests only: a job's input objects, not their listing."""
    aimed = Faults(seed=0, slow_down=1.0, keys="/inputs/.+[.]json$")
    assert aimed.draw("GET", "/bucket/inputs/gen1ou/a.json", 0) == "slow_down"
    assert aimed.draw("GET", "/bucket?list-type=2&prefix=inputs", 0) is None
    assert aimed.draw("PUT", "/bucket/out/part-0.parquet", 0) is None
