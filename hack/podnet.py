"""A network of its own for each pod the local runner runs in a container, reaching only
what its policy allows: the way a CNI enforces the chart's NetworkPolicy (default-deny
egress, then the API server and the run's model and MCP endpoints).

Each pod gets a network namespace and a veth pair: the host side `awh<id>` with the
gateway address, the pod side `eth0` with the pod's, a /30 of 198.19.0.0/16 (the
benchmarking range, RFC 2544: never routed off this machine, and nothing here routes it).
An nftables table of the pod's own on the host (`ip aw-<id>`) drops everything the pod
sends but what the policy allows, and forwards nothing anywhere.

Peers of the local control plane listen on 127.0.0.1 (the API server, a test's model
endpoint): inside the pod, 127.0.0.1 is the pod's own loopback. For each allowed
loopback endpoint, the pod's namespace rewrites a connection to 127.0.0.1:PORT to the
gateway, and the host rewrites it back to 127.0.0.1:PORT (route_localnet on both ends):
the URL the run was given works unchanged, and any other loopback port is the pod's own,
where nothing listens. An allowed endpoint on another of this machine's addresses is let
in as it is; one off this machine is never reached from here (that is the cluster's CNI's
job, and the local runner routes nothing off the machine). DNS is not offered (the local
peers are addresses).

Slots (one /30 each) are claimed as files under the state directory, so runners on one
machine never share an address, and a runner that crashed leaves records the next one
cleans up (`reap`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from localcluster import alive

RANGE = ipaddress.ip_network("198.19.0.0/16")
SLOTS = RANGE.num_addresses // 4
log = logging.getLogger("podrunner")


@dataclass(frozen=True)
class Endpoint:
    host: str  # an IPv4 address
    port: int


def endpoint(url: str) -> Endpoint:
    """An http(s) URL or HOST:PORT as an address and port (a name resolved here)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Endpoint(socket.gethostbyname(parts.hostname), port)


@dataclass(frozen=True)
class PodNetwork:
    id: str  # 8 hex digits: names the namespace, the host's veth and the nft table
    slot: int

    @property
    def netns(self) -> str:
        return f"aw-{self.id}"

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    @property
    def host_link(self) -> str:
        return f"awh{self.id}"  # 11 characters: an interface name has at most 15

    @property
    def gateway(self) -> str:
        return str(RANGE.network_address + 4 * self.slot + 1)

    @property
    def address(self) -> str:
        return str(RANGE.network_address + 4 * self.slot + 2)


def is_local(host: str) -> bool:
    """Whether `host` is one of this machine's addresses."""
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


def host_rules(net: PodNetwork, allowed: list[Endpoint], local: set[str]) -> str:
    """The host's table for the pod: `allowed` reachable (loopback ones through the
    gateway), everything else the pod sends dropped; `local` this machine's addresses
    among the endpoints'."""
    link, gateway = net.host_link, net.gateway
    dnat = [
        f'iifname "{link}" ip daddr {gateway} tcp dport {e.port} dnat to {e.host}'
        for e in allowed
        if ipaddress.ip_address(e.host).is_loopback
    ]
    accept = [
        f'iifname "{link}" ip daddr {e.host} tcp dport {e.port} accept'
        for e in allowed
        if e.host in local and not ipaddress.ip_address(e.host).is_loopback
    ]
    return "\n".join(
        [
            f"table ip aw-{net.id} {{",
            "  chain prerouting {",
            "    type nat hook prerouting priority -100;",
            *(f"    {rule}" for rule in dnat),
            "  }",
            "  chain input {",
            "    type filter hook input priority 0;",
            f'    iifname "{link}" ct state established,related accept',
            # Only the connections the prerouting chain rewrote to an allowed endpoint.
            f'    iifname "{link}" ct status dnat accept',
            *(f"    {rule}" for rule in accept),
            f'    iifname "{link}" drop',
            "  }",
            "  chain forward {",
            "    type filter hook forward priority 0;",
            f'    iifname "{link}" drop',
            f'    oifname "{link}" drop',
            "  }",
            "}",
        ]
    )


def pod_rules(net: PodNetwork, allowed: list[Endpoint]) -> str:
    """The pod namespace's table: its allowed loopback endpoints sent to the gateway."""
    dnat = [
        f"ip daddr {e.host} tcp dport {e.port} dnat to {net.gateway}"
        for e in allowed
        if ipaddress.ip_address(e.host).is_loopback
    ]
    return "\n".join(
        [
            "table ip agentworkers {",
            "  chain output {",
            "    type nat hook output priority -100;",
            *(f"    {rule}" for rule in dnat),
            "  }",
            "  chain postrouting {",
            "    type nat hook postrouting priority 100;",
            '    oifname "eth0" masquerade',
            "  }",
            "}",
        ]
    )


def _run(*command: str, stdin: str | None = None) -> None:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


class Networks:
    """Pod networks of one runner; `state` the machine-wide directory of claimed slots."""

    def __init__(self, state: Path) -> None:
        self.slots = state / "net"
        self.slots.mkdir(parents=True, exist_ok=True)

    def create(self, id: str, allowed: list[Endpoint]) -> PodNetwork:
        net = PodNetwork(id, self._claim(id))
        try:
            self._build(net, allowed)
        except BaseException:
            self.delete(net)
            raise
        return net

    def _claim(self, id: str) -> int:
        for slot in range(SLOTS):
            try:
                fd = os.open(self.slots / str(slot), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as record:
                record.write(f"{os.getpid()} {id}\n")
            return slot
        raise RuntimeError(f"no free pod address left in {RANGE}")

    def _build(self, net: PodNetwork, allowed: list[Endpoint]) -> None:
        ns, link = net.netns, net.host_link
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "addr", "add", f"{net.gateway}/30", "dev", link)
        _run("ip", "link", "set", link, "up")
        # Packets rewritten to 127.0.0.1 may come in on the veth (and replies go out of it).
        Path(f"/proc/sys/net/ipv4/conf/{link}/route_localnet").write_text("1")
        _run("ip", "-n", ns, "addr", "add", f"{net.address}/30", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", net.gateway)
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.eth0.route_localnet=1")
        local = {e.host for e in allowed if is_local(e.host)}
        for e in allowed:
            if e.host not in local:
                log.warning("%s:%d is not this machine's: left to a cluster's CNI", e.host, e.port)
        _run("nft", "-f", "-", stdin=host_rules(net, allowed, local))
        _run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin=pod_rules(net, allowed))

    def delete(self, net: PodNetwork) -> None:
        """Everything `create` made, whatever of it exists."""
        for command in (
            ("nft", "delete", "table", "ip", f"aw-{net.id}"),
            ("ip", "link", "del", net.host_link),
            ("ip", "netns", "del", net.netns),
        ):
            subprocess.run(command, capture_output=True, check=False)
        with contextlib.suppress(FileNotFoundError):
            (self.slots / str(net.slot)).unlink()

    def reap(self, mine: bool = False) -> None:
        """The networks of runners that are gone (crashed), or (`mine`) of this one:
        deleted."""
        for record in self.slots.iterdir():
            with contextlib.suppress(OSError, ValueError):
                pid, _, id = record.read_text().strip().partition(" ")
                if int(pid) == os.getpid() if mine else not alive(int(pid)):
                    log.info("deleting the network of %s (its runner stopped)", id)
                    self.delete(PodNetwork(id, int(record.name)))
