"""Lesson 16, exercise: the 1F1B schedule.

One solution, out of the lesson's sight: `%iris solution 16` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
def one_f_one_b(pipe):
    """1F1B on stage pipe.rank of pipe.stages: warm up, then a forward and a backward in turn, then cool down."""
    stages, stage, micro_batches = pipe.stages, pipe.rank, pipe.micro_batches
    warm_up = min(stages - stage - 1, micro_batches)           # forwards that fill the stages after this one
    for m in range(warm_up):
        pipe.forward(m)
    for m in range(micro_batches - warm_up):                   # the steady state: the next forward, the oldest backward
        pipe.forward(warm_up + m)
        pipe.backward(m)
    for m in range(micro_batches - warm_up, micro_batches):    # cool down: the backwards left
        pipe.backward(m)


pipeline.on_paper(one_f_one_b, world_size, 8)                  # a deadlock raises here, instead of hanging the ranks
inputs_8, targets_8 = pipeline.batch(8, ROWS, WIDTH)
pipe = pipeline.Pipe(model, rank, STAGES, inputs_8, targets_8, 8, link)
pipe.run(one_f_one_b)
one_f_one_b_calls, one_f_one_b_peak = [event[:2] for event in pipe.events], pipe.peak
one_f_one_b_grads, one_f_one_b_loss = pipe.grads(), pipe.loss.item()
