"""A real `bench serve` for the web half of issue 28's tests: a subprocess on a free loopback port
with a state folder (and database) of its own, users made by `bench user add`, and httpx clients
logged in over HTTP(S)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import run_bench
from tests.e2e.browser import free_port

PASSWORD = "a-long-pass-for-the-tests"


def bench_env(root: Path, database: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BENCHFLOW_"))}
    env["BENCHFLOW_HOME"] = str(root / "state")
    env.pop("DATABASE_URL", None)
    if database is not None:
        env["DATABASE_URL"] = database
    return {**env, **extra}


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Site:
    """`bench serve [args]` until stop(); `users` maps names to roles, all with PASSWORD."""

    def __init__(
        self,
        root: Path,
        env: dict[str, str],
        *,
        args: tuple[str, ...] = (),
        users: dict[str, str] | None = None,
        tls: tuple[Path, Path] | None = None,
    ):
        self.root, self.env = root, {**env, "BENCHFLOW_PASSWORD": PASSWORD}
        root.mkdir(parents=True, exist_ok=True)
        for name, role in (users or {}).items():
            self.bench("user", "add", name, "--role", role)
        self.port = free_port()
        scheme = "https" if tls else "http"
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        argv = ["serve", "--port", str(self.port), *args]
        if tls:
            argv += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        self.log = root / "server.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchflow_site.cli", *argv],
                cwd=root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(self.base + "/login/", timeout=2, verify=False)
                return
            except httpx.HTTPError as exc:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"bench serve exited: {self.log.read_text()}") from exc
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("bench serve did not answer within 60 s")

    def bench(self, *args: str, password: str | None = None) -> subprocess.CompletedProcess:
        env = {**self.env, "BENCHFLOW_PASSWORD": password or PASSWORD}
        return run_bench(list(args), env=env, cwd=self.root, timeout=120)

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30, verify=False, headers=headers)

    def login(
        self, client: httpx.Client, name: str, password: str = PASSWORD, **headers: str
    ) -> httpx.Response:
        """POST the login form (after a GET for its CSRF token); 302 on success."""
        client.get("/login/", headers=headers)
        return client.post(
            "/login/",
            data={
                "username": name,
                "password": password,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": self.base + "/login/", **headers},
        )

    def logged_in(self, name: str, **headers: str) -> httpx.Client:
        client = self.client()
        answer = self.login(client, name, **headers)
        assert answer.status_code == 302, answer.text[:500]
        return client

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def cookie_header(client: httpx.Client) -> str:
    return "; ".join(f"{k}={v}" for k, v in client.cookies.items())


def set_cookies(response: httpx.Response) -> dict[str, str]:
    """The Set-Cookie headers of a response, by cookie name."""
    found: dict[str, str] = {}
    for value in response.headers.get_list("set-cookie"):
        found[value.split("=", 1)[0]] = value
    return found


def users_of(site: Site) -> dict[str, list[str]]:
    """`bench user list`: each user's role (and `disabled`)."""
    done = site.bench("user", "list")
    assert done.returncode == 0, done.stderr
    return {line.split("\t")[0]: line.split("\t")[1:] for line in done.stdout.splitlines()}
