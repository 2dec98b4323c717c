"""How many trials fit at once, node by node (tuner.resources.sizing); no Ray needed."""

import pytest

from tuner.resources.sizing import ClusterResources, check_fits, trials_that_fit
from tuner.spec import SpecError, load_spec

TWO_SMALL_NODES = ClusterResources(2, 0, "the Ray cluster at h:6379 (2 nodes)", ((1, 0), (1, 0)))


def spec(**resources):
    return load_spec({"trainable": "tests.trainables:quadratic", "resources": resources})


@pytest.mark.parametrize("resources,cluster,fit", [
    ({"cpu": 1}, ClusterResources(4, 0), 4),  # one machine: the totals
    ({"cpu": 1}, TWO_SMALL_NODES, 2),
    ({"cpu": 2}, ClusterResources(2, 0), 1),
    ({"cpu": 2}, TWO_SMALL_NODES, 0),  # 2 CPUs in all, but no node has 2
    ({"cpu": 1, "gpu": 1}, ClusterResources(8, 2, "c", ((4, 1), (4, 1))), 2),
    ({"cpu": 3}, ClusterResources(8, 0, "c", ((4, 0), (4, 0))), 2),  # 8 // 3 would say 2 as well
    ({"cpu": 3}, ClusterResources(9, 0, "c", ((4, 0), (5, 0))), 2),  # 9 // 3 = 3 would be wrong
    ({"workers": 2, "cpu_per_worker": 1}, TWO_SMALL_NODES, 1),  # PACK may span nodes
    ({"workers": 2, "cpu_per_worker": 1, "placement_strategy": "STRICT_PACK"}, TWO_SMALL_NODES, 0),
    ({"workers": 2, "cpu_per_worker": 1, "placement_strategy": "STRICT_SPREAD"}, TWO_SMALL_NODES, 1),
    ({"workers": 2, "cpu_per_worker": 1, "placement_strategy": "STRICT_SPREAD"},
     ClusterResources(4, 0, "c", ((4, 0),)), 0),  # one node cannot spread two workers
    ({"workers": 2, "cpu_per_worker": 2}, ClusterResources(6, 0, "c", ((3, 0), (3, 0))), 1),
])
def test_trials_that_fit_count_node_by_node(resources, cluster, fit):
    assert trials_that_fit(spec(**resources), cluster) == fit


def test_a_trial_no_single_node_can_hold_is_refused_with_the_largest_node_named():
    with pytest.raises(SpecError) as info:
        check_fits(spec(cpu=2), TWO_SMALL_NODES)
    assert str(info.value) == (
        "<spec>: resources.cpu: one trial asks for 2 CPU, 0 GPU on one node, but no node of the Ray cluster at "
        "h:6379 (2 nodes) can hold it (the largest has 1 CPU, 0 GPU; 2 CPU, 0 GPU in all); lower "
        "resources.cpu/gpu, use DDP workers (resources.workers) to span nodes, or bigger nodes.")
    with pytest.raises(SpecError) as info:
        check_fits(spec(workers=2, cpu_per_worker=1, placement_strategy="STRICT_PACK"), TWO_SMALL_NODES)
    assert "resources.placement_strategy: one trial asks for its 2 workers x (1 CPU, 0 GPU) with " \
           "placement_strategy STRICT_PACK, but no node of" in str(info.value)
    check_fits(spec(workers=2, cpu_per_worker=1), TWO_SMALL_NODES)  # PACK: fits over both nodes


def test_gpus_are_checked_node_by_node_too():
    """`tuner validate --address` on a cluster with GPUs: 2 GPUs in all, one a node, cannot hold a trial of 2
    GPUs (refused on resources.gpu, the largest node named), and gpu: auto needs a whole GPU on some node."""
    two_gpu_nodes = ClusterResources(8, 2, "the Ray cluster at h:6379 (2 nodes)", ((4, 1), (4, 1)))
    with pytest.raises(SpecError) as info:
        check_fits(spec(cpu=1, gpu=2), two_gpu_nodes)
    assert str(info.value).startswith(
        "<spec>: resources.gpu: one trial asks for 1 CPU, 2 GPU on one node, but no node of the Ray cluster at "
        "h:6379 (2 nodes) can hold it (the largest has 4 CPU, 1 GPU; 8 CPU, 2 GPU in all)")
    check_fits(spec(cpu=1, gpu=1), two_gpu_nodes)
    check_fits(spec(cpu=1, gpu="auto"), two_gpu_nodes)
    with pytest.raises(SpecError) as info:
        check_fits(spec(cpu=1, gpu="auto"), ClusterResources(8, 1, "c", ((4, 0.5), (4, 0.5))))
    assert "resources.gpu: gpu: auto packs trials onto GPUs, but c has 1 GPU (no node has a whole one)" in str(info.value)


@pytest.mark.parametrize("scheduler,cpus,noted", [
    ("hyperband", 2, True),  # 2 workers x 1 CPU: one DDP trial at a time
    ("bohb", 2, True),
    ("hyperband", 4, False),  # two DDP trials live together: rungs can compare them
    ("asha", 2, False),  # asynchronous: compares against the rung's history
])
def test_plan_notes_a_synchronous_hyperband_with_one_ddp_trial_at_a_time(scheduler, cpus, noted):
    from tuner.resources.sizing import describe_resources

    s = load_spec({"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
                   "resources": {"workers": 2, "cpu_per_worker": 1}, "scheduler": {"type": scheduler},
                   **({"search": {"algorithm": "bohb"}} if scheduler == "bohb" else {})})
    note = (f"note:       scheduler {scheduler} will stop no trial early here: it compares a bracket's trials "
            "while they are live together, and only 1 DDP trial fits at a time (paused trials count); use "
            "scheduler asha, or run where 2 or more DDP trials fit.")
    assert (note in describe_resources(s, ClusterResources(cpus, 0))) is noted
