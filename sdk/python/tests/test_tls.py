"""TLS and credentials on the wire, against an in-process gRPC server with
certificates made by openssl: the server's name is checked against the CA
given, a client certificate is presented when asked for, and Basic
credentials arrive as the authorization metadata the services read."""

import os
import subprocess
import tempfile
import unittest

import grpc

import pulsequeue as pulse
from pulsequeue.pb.pulse.v1 import control_pb2


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: str) -> None:
    """ca.pem, server.pem/-key.pem for DNS:pulse.test, client.pem/-key.pem."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
             "-days", "1", "-subj", "/CN=pulse test CA", cwd=d)
    for name, ext in [("server", "subjectAltName=DNS:pulse.test\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")]:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + "-key.pem", "-out", name + ".csr",
                 "-subj", "/CN=" + name, cwd=d)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                 "-out", name + ".pem", "-days", "1", "-extfile", name + ".ext", cwd=d)


class TLSTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pulse-sdk-py-tls-")
        make_pki(cls.dir)

    @classmethod
    def tearDownClass(cls):
        import shutil

        shutil.rmtree(cls.dir, ignore_errors=True)

    async def asyncSetUp(self):
        self.seen = []

        async def submit(req, ctx):
            md = dict(ctx.invocation_metadata())
            cn = ctx.auth_context().get("x509_common_name", [b""])[0].decode()
            self.seen.append((md.get("authorization"), cn, req.job.topic))
            return control_pb2.SubmitJobResponse(result=control_pb2.SubmitResult(id="job-1"))

        handler = grpc.method_handlers_generic_handler("pulse.v1.ControlService", {
            "SubmitJob": grpc.unary_unary_rpc_method_handler(
                submit,
                request_deserializer=control_pb2.SubmitJobRequest.FromString,
                response_serializer=control_pb2.SubmitJobResponse.SerializeToString,
            )
        })
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((handler,))
        creds = grpc.ssl_server_credentials(
            [(self.read("server-key.pem"), self.read("server.pem"))],
            root_certificates=self.read("ca.pem"),
            require_client_auth=True,
        )
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        await self.server.start()
        # Not loopback by name, so the plaintext check would refuse it.
        self.target = f"ipv4:127.0.0.1:{self.port}"

    async def asyncTearDown(self):
        await self.server.stop(None)

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def path(self, name):
        return os.path.join(self.dir, name)

    async def test_tls_with_a_client_certificate_and_basic_auth(self):
        tls = pulse.TLS(ca_file=self.path("ca.pem"), cert_file=self.path("client.pem"),
                        key_file=self.path("client-key.pem"), server_name="pulse.test")
        async with pulse.Client(self.target, tls=tls, user="producer", password="s3cret:x", rpc_timeout=30) as c:
            s = await c.enqueue("tls.test", {"a": 1})
        self.assertEqual(s.id, "job-1")
        # base64("producer:s3cret:x")
        self.assertEqual(self.seen, [("Basic cHJvZHVjZXI6czNjcmV0Ong=", "client", "tls.test")])

    async def test_the_server_name_is_checked(self):
        tls = pulse.TLS(ca_file=self.path("ca.pem"), cert_file=self.path("client.pem"),
                        key_file=self.path("client-key.pem"), server_name="someone-else.test")
        async with pulse.Client(self.target, tls=tls, rpc_timeout=10) as c:
            with self.assertRaises(grpc.aio.AioRpcError) as cm:
                await c.enqueue("tls.test")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.seen, [])

    async def test_an_untrusted_server_is_refused(self):
        tls = pulse.TLS(ca_file=self.path("client.pem"), cert_file=self.path("client.pem"),
                        key_file=self.path("client-key.pem"), server_name="pulse.test")
        async with pulse.Client(self.target, tls=tls, rpc_timeout=10) as c:
            with self.assertRaises(grpc.aio.AioRpcError) as cm:
                await c.enqueue("tls.test")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.seen, [])

    async def test_pem_contents_work_like_files(self):
        tls = pulse.TLS(ca_pem=self.read("ca.pem"), cert_pem=self.read("client.pem"),
                        key_pem=self.read("client-key.pem"), server_name="pulse.test")
        async with pulse.Client(self.target, tls=tls, token="t0k", rpc_timeout=30) as c:
            await c.enqueue("tls.test")
        self.assertEqual(self.seen[0][:2], ("Bearer t0k", "client"))


if __name__ == "__main__":
    unittest.main()
