"""MetaQA / WikiMovies: how its relations are spoken of, and which hold one value per movie
(the knowledge graph of the evaluation's movie sets is built with them)."""

from __future__ import annotations

MOVIE_RELATION_PHRASES: dict[str, list[str]] = {
    "directed_by": ["directed", "director", "directors", "direct", "directs"],
    "written_by": ["written", "writer", "writers", "wrote", "screenplay", "script"],
    "starred_actors": [
        "starred",
        "starring",
        "stars",
        "star",
        "actor",
        "actors",
        "actress",
        "cast",
        "acted",
        "appeared",
        "appears",
    ],
    "release_year": ["released", "release", "came out", "premiered"],
    "in_language": ["language", "languages", "spoken", "in"],
    "has_genre": ["genre", "genres"],
    "has_tags": ["tag", "tags", "tagged", "about", "describe", "describes", "described"],
    "has_imdb_rating": ["rating", "rated"],
    "has_imdb_votes": ["votes"],
}
"""Surface phrases of the MetaQA / WikiMovies relations (other graphs: the relation's own name)."""
MOVIE_FUNCTIONAL_RELATIONS = ("release_year", "directed_by", "has_imdb_rating", "has_imdb_votes")
"""MetaQA relations with one value per movie (over 90% of its movies have exactly one; a title
shared by several films is what holds the rest)."""
