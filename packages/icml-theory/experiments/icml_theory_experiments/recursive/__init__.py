"""trm-vs-dis: TRM against Deep Improvement Supervision on 6x6 Sudoku and mazes."""
