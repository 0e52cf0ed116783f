"""The base layer: what every other layer of iris may use, knowing nothing above it.

* :mod:`.backend`: which backend a process uses (``cuda`` or ``cpu``) and which GPU a rank's heap lives on;
* :mod:`.sizes`: ``"64MiB"`` and back; :mod:`.versions`: the torch/triton/numpy range iris supports;
* :mod:`.logging`: ``[rank/world]`` log lines; :mod:`.warning_site`: warnings said once, at the user's line;
* :mod:`.errors`: the mark of errors a kernel may raise; :mod:`.patching`: replacing a Triton attribute once;
* :mod:`.launch_options`: upstream's AMD-only launch options, dropped on NVIDIA GPUs and the interpreter;
* :mod:`.distributed`: torch.distributed helpers (start from torchrun's variables, exchange host objects);
* :mod:`.gpu_specs`: the spec sheets of the common data-centre GPUs;
* :mod:`.tables`: HTML tables whose headers stand over their values (the views' and reports' tables).

Imports nothing of iris. Each module here is one fact or one helper that two layers above it need.

Examples
--------
>>> from iris.base.sizes import parse_size
>>> parse_size("64MiB")
67108864
"""
