"""Layout search: the fastest parallel layouts that fit in memory.

- ``search(SearchRequest(...))`` -> ``SearchResult`` (``search.api``; the request's concerns in
  ``search.request``: problem, search options, ranking): exhaustive (OR-tools CP-SAT enumerates
  the degree core, numpy expands and broadcasts the rest, the cost model prices everything in
  one vectorized call) or optuna (samplers tpe, random, nsga2) for spaces too big to enumerate.
- ``search.rules``: the named hard rules, as numpy checks and as CP-SAT constraints;
  ``check_layout`` rejects a user layout with one line naming the rule.

Heavy imports (ortools, optuna) happen inside the functions that need them.
"""

from search.api import SearchResult, parse_gpu_counts, search
from search.request import ProblemRequest, Ranking, SearchOptions, SearchRequest
from search.rules import RULES, check_layout, first_violation

__all__ = ["SearchResult", "parse_gpu_counts", "search", "ProblemRequest", "Ranking", "SearchOptions", "SearchRequest",
           "RULES", "check_layout", "first_violation"]
