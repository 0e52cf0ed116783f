# Install the Jupyter-side wheels (ipyparallel and what it needs, absent from the GPU image) carried in .whl/.
# Source it, so the PYTHONPATH it exports reaches the tests:
#   source tests/gpu/install_wheels.sh && bash tests/gpu/run_gpu_checks.sh -k workbench
# The device call must name .whl in carry. The wheels are made here (see tests/gpu/test_workbench_cuda.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit
