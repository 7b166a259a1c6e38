"""The replay: a step replayed from its calls, ops and streams, and the what-ifs it prices.

One way down: whatif → joint → chain → schedule → model; levers and ledger beside.
  codes          call categories and "no index" as the model's small codes
  model          StepModel, cut from a window (step_model); host_timeline, waits: its parts
  levers         Lever, parse_levers, what each lever does to a model, whether it applies
  schedule       the replay of one step (replay, replaying): where each call and op lands
  chain          a run-ahead step replayed as copies back to back (replay_step)
  joint          ranks in lockstep replayed together
  ledger         the ledger of a replayed step
  whatif         predictions: a lever's predicted step and saving; the lever for a candidate
"""
