"""What planner prints and draws: the evaluate report, the search and sweep tables, the run
block, the timeline and the plots."""
