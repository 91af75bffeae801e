"""ImageLocality: image sizes on the node, scaled by how widespread the image is."""

from __future__ import annotations

from tests.unit.plugins.spread_fixtures import scores
from tests.unit.scheduler_fixtures import container, make_env, node, pod

MIB = 1024 * 1024


def with_images(name: str, *images: tuple[list[str], int]) -> dict[str, object]:
    raw = node(name)
    raw["status"]["images"] = [{"names": names, "sizeBytes": size} for names, size in images]  # type: ignore[index]
    return raw


def image_pod(*images: str) -> dict[str, object]:
    containers = []
    for i, image in enumerate(images):
        c = container("100m", name=f"c{i}")
        c["image"] = image
        containers.append(c)
    return pod("p", containers=containers)


def test_score_scales_size_by_spread_and_clamps() -> None:
    env = make_env(
        with_images("has", (["docker.io/library/nginx:latest", "nginx:latest"], 500 * MIB)),
        with_images("small", (["nginx:latest"], 10 * MIB)),
        node("none"),
        node("other"),
    )
    # nginx (tagless: nginx:latest) is on 2 of 4 nodes: 500 MiB * 0.5 = 250 MiB on "has";
    # (250 - 23) / (1000 - 23) * 100 = 23. "small": 5 MiB, below 23 MiB: 0.
    assert scores(env, "ImageLocality", image_pod("nginx"), "has", "small", "none") == [23, 0, 0]


def test_the_threshold_grows_with_the_number_of_containers() -> None:
    env = make_env(with_images("has", (["big:1"], 2000 * MIB)), node("none"))
    # One container: 1000 MiB (spread 0.5 of 2000) is the maximum: 100.
    assert scores(env, "ImageLocality", image_pod("big:1"), "has", "none") == [100, 0]
    # Two containers: the maximum is 2000 MiB: (1000 - 23) / (2000 - 23) -> 49.
    assert scores(env, "ImageLocality", image_pod("big:1", "absent:2"), "has", "none") == [49, 0]


def test_node_images_are_reindexed_when_a_node_changes() -> None:
    env = make_env(node("a"), node("b"))
    wanted = image_pod("app:1")
    assert scores(env, "ImageLocality", wanted, "a", "b") == [0, 0]
    env.view.on_node("MODIFIED", with_images("a", (["app:1"], 1000 * MIB)))
    assert scores(env, "ImageLocality", wanted, "a", "b") == [48, 0]
