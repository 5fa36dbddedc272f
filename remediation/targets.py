"""Prometheus HTTP service discovery entries for node agents (pure)."""

from urllib.parse import urlsplit


def scrape_target(node: str, agent_url: str, *, pod: str, rack: str) -> dict:
    """One http_sd entry: the agent's host and port as the target, its path as the metrics path,
    and the node's name and place as labels, which the alerts carry to the webhook."""
    url = urlsplit(agent_url)
    return {
        "targets": [url.netloc],
        "labels": {
            "node": node,
            "pod": pod,
            "rack": rack,
            "__metrics_path__": f"{url.path.rstrip('/')}/metrics",
            "__scheme__": url.scheme or "http",
        },
    }
