"""Lesson 03, second exercise: an order in which rank 1 polls its flag three times before the message lands.

One solution, out of the lesson's sight: `%iris solution 03b` loads it into a notebook cell
(the text after this docstring)."""
# One solution.
ORDER = "three_polls.order.json"
early = workbench.step("pass_message()")
early.step_each()          # each rank steps into the first host barrier; the last one in lets both out
for _ in range(3):
    early.step(1)          # rank 1 polls its flag and reads 0, three times: rank 0 is held before its store
early.run_to_end()         # then the ranks take turns: the message lands, the flag is raised, rank 1 reads it
early.order.save(ORDER)
early
