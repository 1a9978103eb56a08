"""The decode pool (``data.autoscale``): sized by what the trainers wait for, not by Ray Data's
queue.

- :mod:`.policy`: the pure decision, from the ranks' waits and the actors' busy time;
- :mod:`.controller`: the driver's controller that applies it every tick (and asks the
  autoscaler for preprocessing nodes);
- :mod:`.live_limits`: the CPU limit a running Ray Data execution reads again and again, which
  the controller moves.
"""
