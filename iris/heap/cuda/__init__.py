"""The CUDA backend of the heap layer: every line of iris that talks to the CUDA driver lives here.

* :mod:`.ipc`: one device allocation per rank, shared with ``cudaIpcGetMemHandle`` (``allocator_type="torch"``);
* :mod:`.vmm`: CUDA virtual memory, chunks mapped into a fixed reservation that grows on demand (the default);
* :mod:`.fd_exchange`: the chunks' file descriptors passed between a host's ranks over Unix sockets;
* :mod:`.topology`: the GPUs of a host and the links between them (CUDA driver, NVML).

Nothing here is imported on the CPU backend: :mod:`iris.heap.symmetric` reaches these modules only for a heap on
a GPU. cuda-bindings is imported here and nowhere else in iris (``tests/test_layers.py``).

Examples
--------
>>> from iris.heap.cuda.vmm import vmm_unavailable      # doctest: +SKIP
>>> vmm_unavailable(0) is None                          # doctest: +SKIP
True
"""
