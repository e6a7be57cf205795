"""Self-balancing: a pure planner that turns a cluster's load into partition reassignments.

The planner (planner.py) runs goals (goals.py) in priority order over a working copy of the
cluster (model.py); it does no I/O, so `strom rebalance` and a controller can both drive it
and tests can check it without processes. See docs/decisions/0042-self-balancing.md.
"""

from strom.balancer.model import BalancerConstraints, BrokerInfo, PartitionInfo, PlanError
from strom.balancer.planner import BrokerLoad, Plan, Reassignment, plan_rebalance

__all__ = ["BalancerConstraints", "BrokerInfo", "BrokerLoad", "PartitionInfo", "Plan", "PlanError", "Reassignment",
           "plan_rebalance"]
