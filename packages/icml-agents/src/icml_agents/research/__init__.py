"""DualGraph memory for deep-research agents: an outline graph and a knowledge graph that co-evolve, with
search queries chosen from the gaps in their topology; linear and outline-centric agents for comparison.

The paper's text was not available: the gap signals, their scores and the outline revision are our
reconstruction (see :mod:`icml_agents.research.gaps`).
"""

from icml_agents.research.agents import (
    DualGraphResearcher,
    LinearResearcher,
    OutlineResearcher,
    Researcher,
    ResearchResult,
    ResearchState,
)
from icml_agents.research.extract import (
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    draft_outline,
    extract,
    merge_extraction,
    parse_extraction,
)
from icml_agents.research.gaps import (
    DEFAULT_WEIGHTS,
    GAP_SIGNALS,
    Gap,
    coverage_gaps,
    disconnected_gaps,
    gap_queries,
    imbalance_gaps,
    link_entities,
    missing_link_gaps,
    pagerank,
    single_source_gaps,
    thin_hub_gaps,
)
from icml_agents.research.graphs import (
    EntityResolver,
    KnowledgeGraph,
    OutlineGraph,
    Relation,
    Section,
    load_graphs,
    normalize_name,
    save_graphs,
)
from icml_agents.research.report import (
    Claim,
    Report,
    ReportSection,
    citation_validity,
    section_balance,
    write_report,
)
from icml_agents.research.search import (
    BM25Search,
    BudgetExhausted,
    Document,
    SearchBudget,
    SearchHit,
    SearchTool,
    tokenize,
)

__all__ = [
    "DEFAULT_WEIGHTS",
    "GAP_SIGNALS",
    "BM25Search",
    "BudgetExhausted",
    "Claim",
    "Document",
    "DualGraphResearcher",
    "EntityResolver",
    "ExtractedEntity",
    "ExtractedRelation",
    "Extraction",
    "Gap",
    "KnowledgeGraph",
    "LinearResearcher",
    "OutlineGraph",
    "OutlineResearcher",
    "Relation",
    "Report",
    "ReportSection",
    "ResearchResult",
    "ResearchState",
    "Researcher",
    "SearchBudget",
    "SearchHit",
    "SearchTool",
    "Section",
    "citation_validity",
    "coverage_gaps",
    "disconnected_gaps",
    "draft_outline",
    "extract",
    "gap_queries",
    "imbalance_gaps",
    "link_entities",
    "load_graphs",
    "merge_extraction",
    "missing_link_gaps",
    "normalize_name",
    "pagerank",
    "parse_extraction",
    "save_graphs",
    "section_balance",
    "single_source_gaps",
    "thin_hub_gaps",
    "tokenize",
    "write_report",
]
