"""Seeded English-like documents with document-level latent content and exact log-probabilities.

The generative process (one document):

1. A length L in sentences, p(L) proportional to 1/L on [min_sentences, max_sentences], so lengths
   spread over two orders of magnitude.
2. A latent topic k ~ uniform over n_topics; each topic reorders the noun vocabulary, so nouns are
   Zipf-distributed with a topic-specific ranking. The topic is never written: the log-probability
   marginalises it exactly (a log-sum-exp over topics).
3. L sentences, each from one of five templates:
     "E lives in P."        home(E) is drawn on E's first such sentence and repeated afterwards
     "E likes the A N."     like(E) = (A, N) drawn on first use and repeated afterwards
     "The A N V the N."     free content (topic nouns)
     "E met E at P."
     "E V the N with E."
   Entities E follow a Chinese restaurant process inside the document: a mention reuses entity e
   with probability count(e) / (n + alpha) or introduces a new name with probability
   alpha / (n + alpha), drawn Zipf over the names not yet used. So names and their facts recur,
   and context lowers the loss.
4. Sentences are joined by a blank line with probability paragraph_break_prob, else by a space.

Every choice is recoverable from the text (words of different classes are disjoint, templates are
told apart by their second word), so the text determines the choices uniquely and
log p(text) = sum of the log-probabilities of the choices, topic marginalised. Generation runs
well above 1M tokens per 10 s on one core.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

TEMPLATES = ("lives", "likes", "free", "met", "with")


@dataclass(frozen=True)
class Grammar:
    """Sizes and probabilities of the synthetic language; the word lists depend on language_seed
    only."""

    n_names: int = 400
    n_places: int = 200
    n_nouns: int = 1000
    n_adjectives: int = 200
    n_verbs: int = 200
    n_topics: int = 8
    zipf_exponent: float = 1.1
    new_entity_alpha: float = 1.0
    min_sentences: int = 3
    max_sentences: int = 300
    paragraph_break_prob: float = 0.2
    template_probs: tuple[float, ...] = (0.2, 0.15, 0.35, 0.15, 0.15)
    language_seed: int = 0


def _zipf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def _pseudo_words(n: int, rng: np.random.Generator) -> list[str]:
    """n distinct consonant-vowel words of 2-3 syllables (no English function word has this
    form)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    ordered: list[str] = []
    while len(ordered) < n:
        k = 2 if rng.random() < 0.6 else 3
        word = "".join(syllables[i] for i in rng.integers(0, len(syllables), size=k))
        if word not in words:
            words.add(word)
            ordered.append(word)
    return ordered


class SyntheticLanguage:
    """The fixed vocabulary and distributions of one Grammar; samples documents with log p."""

    def __init__(self, grammar: Grammar = Grammar()):
        g = self.grammar = grammar
        rng = np.random.default_rng(g.language_seed)
        sizes = [g.n_names, g.n_places, g.n_nouns, g.n_adjectives, g.n_verbs]
        words = _pseudo_words(sum(sizes), rng)
        bounds = np.cumsum([0, *sizes])
        self.names = [w.capitalize() for w in words[bounds[0] : bounds[1]]]
        self.places = [w.capitalize() for w in words[bounds[1] : bounds[2]]]
        self.nouns, self.adjectives, self.verbs = (
            words[bounds[i] : bounds[i + 1]] for i in (2, 3, 4)
        )
        self.p_name = _zipf(g.n_names, g.zipf_exponent)
        self.p_place, self.p_adj, self.p_verb = (
            _zipf(n, g.zipf_exponent) for n in (g.n_places, g.n_adjectives, g.n_verbs)
        )
        self.log_p_place, self.log_p_adj, self.log_p_verb = (
            np.log(self.p_place),
            np.log(self.p_adj),
            np.log(self.p_verb),
        )
        # topic k gives noun j the Zipf probability of rank noun_rank[k, j]
        zipf_nouns = _zipf(g.n_nouns, g.zipf_exponent)
        self.noun_rank = np.stack([rng.permutation(g.n_nouns) for _ in range(g.n_topics)])
        self.log_p_noun = np.log(zipf_nouns)[self.noun_rank]  # [topic, noun]
        self.cdf_noun_by_topic = np.cumsum(np.exp(self.log_p_noun), axis=1)
        lengths = np.arange(g.min_sentences, g.max_sentences + 1)
        self.p_length = (1.0 / lengths) / (1.0 / lengths).sum()
        self.lengths = lengths
        self.cdf_name, self.cdf_place, self.cdf_adj, self.cdf_verb, self.cdf_length = (
            np.cumsum(p)
            for p in (self.p_name, self.p_place, self.p_adj, self.p_verb, self.p_length)
        )
        self.log_p_template = np.log(np.asarray(g.template_probs) / sum(g.template_probs))
        self.p_template = np.exp(self.log_p_template)

    def sample(self, rng: np.random.Generator) -> tuple[str, float]:
        """One document and its natural log-probability under this language."""
        g = self.grammar
        n_sent = int(self.lengths[_draw_one(self.cdf_length, rng)])
        logp = math.log(self.p_length[n_sent - g.min_sentences]) - math.log(g.n_topics)
        topic = int(rng.integers(g.n_topics))
        templates = rng.choice(len(TEMPLATES), size=n_sent, p=self.p_template)
        logp += float(self.log_p_template[templates].sum())
        doc = _Document(self, rng, n_sent, topic, logp)  # draws the words in bulk
        breaks = rng.random(n_sent) < g.paragraph_break_prob
        out: list[str] = []
        for s, t in enumerate(templates):
            out.append(doc.sentence(t))
            if s < n_sent - 1:
                out.append("\n\n" if breaks[s] else " ")
        doc.logp += self._log_p_breaks(breaks, n_sent - 1)
        doc.logp += self._log_p_words(doc.used)
        doc.logp += self._log_p_nouns(doc.used["noun"])
        return "".join(out), doc.logp

    def _log_p_breaks(self, breaks: np.ndarray, n_gaps: int) -> float:
        """Log-probability (nats) of the `n_gaps` separators: a paragraph break or a space each."""
        p = self.grammar.paragraph_break_prob
        n_breaks = int(breaks[:n_gaps].sum())
        return n_breaks * math.log(p) + (n_gaps - n_breaks) * math.log(1 - p)

    def _log_p_words(self, used: dict[str, list]) -> float:
        """Log-probability (nats) of the places, adjectives and verbs the text shows."""
        return float(
            self.log_p_place[used["place"]].sum()
            + self.log_p_adj[used["adj"]].sum()
            + self.log_p_verb[used["verb"]].sum()
        )

    def _log_p_nouns(self, nouns: list) -> float:
        """Log-probability (nats) of the nouns with the topic marginalised, 1/K excluded."""
        # log sum_k (1/K) prod_j p_k(noun_j); the 1/K is added with the length
        per_topic = self.log_p_noun[:, nouns].sum(axis=1)
        top = per_topic.max()
        return float(top + math.log(np.exp(per_topic - top).sum()))


class _Document:
    """One document being sampled: its running log-probability (nats), its entities and facts, and
    the words drawn in bulk for it (consumed in order; the used ones are recorded)."""

    def __init__(
        self,
        language: SyntheticLanguage,
        rng: np.random.Generator,
        n_sent: int,
        topic: int,
        logp: float,
    ):
        self.language, self.rng, self.logp = language, rng, logp
        # bulk draws in this order; sized generously for the worst case of each template
        self.draws = {"place": _draw(language.cdf_place, rng, 2 * n_sent)}
        self.draws["adj"] = _draw(language.cdf_adj, rng, 2 * n_sent)
        self.draws["verb"] = _draw(language.cdf_verb, rng, 2 * n_sent)
        self.draws["noun"] = _draw(language.cdf_noun_by_topic[topic], rng, 3 * n_sent)
        self.used: dict[str, list] = {kind: [] for kind in self.draws}
        self.counts: dict[int, int] = {}  # entity -> mentions so far
        self.mentions = 0
        self.used_mass = 0.0  # Zipf mass of the names already introduced
        self.home: dict[int, int] = {}
        self.like: dict[int, tuple[int, int]] = {}

    def take(self, kind: str):
        """The next bulk-drawn word index of `kind` (place, adj, verb, noun), recorded as used."""
        value = self.draws[kind][len(self.used[kind])]
        self.used[kind].append(value)
        return value

    def entity(self) -> int:
        """One entity mention of the Chinese restaurant process; adds its log-probability."""
        g = self.language.grammar
        a = g.new_entity_alpha if len(self.counts) < g.n_names else 0.0  # every name used: no new
        u = self.rng.random() * (self.mentions + a)
        if u < self.mentions:  # reuse an existing entity, chosen proportionally to its count
            e = self._reused(u)
            self.logp += math.log(self.counts[e] / (self.mentions + a))
        else:  # a new name, Zipf over the names not yet used
            e = self._new_name()
            p_name = self.language.p_name[e]
            self.logp += math.log(a / (self.mentions + a)) + math.log(
                p_name / (1.0 - self.used_mass)
            )
            self.used_mass += p_name
            self.counts[e] = 0
        self.counts[e] += 1
        self.mentions += 1
        return e

    def _reused(self, u: float) -> int:
        """The entity whose cumulative mention count first exceeds `u`."""
        acc = 0.0
        for e in self.counts:  # e is used after the loop
            acc += self.counts[e]
            if u < acc:
                break
        return e

    def _new_name(self) -> int:
        """A Zipf-drawn name not yet used in this document (rejection sampling)."""
        while True:
            e = _draw_one(self.language.cdf_name, self.rng)
            if e not in self.counts:
                return e

    def sentence(self, template: int) -> str:
        """One sentence of template `template` (an index into TEMPLATES)."""
        return (self._lives, self._likes, self._free, self._met, self._with)[template]()

    def _lives(self) -> str:
        """Template 'E lives in P.': home(E) is drawn on E's first such sentence, then repeated."""
        e = self.entity()
        if e not in self.home:
            self.home[e] = int(self.take("place"))
        lang = self.language
        return f"{lang.names[e]} lives in {lang.places[self.home[e]]}."

    def _likes(self) -> str:
        """Template 'E likes the A N.': like(E) is drawn on first use and repeated afterwards."""
        e = self.entity()
        if e not in self.like:
            self.like[e] = (int(self.take("adj")), int(self.take("noun")))
        a, n = self.like[e]
        lang = self.language
        return f"{lang.names[e]} likes the {lang.adjectives[a]} {lang.nouns[n]}."

    def _free(self) -> str:
        """Template 'The A N V the N.': free content (topic nouns)."""
        a, n1, v, n2 = self.take("adj"), self.take("noun"), self.take("verb"), self.take("noun")
        lang = self.language
        return f"The {lang.adjectives[a]} {lang.nouns[n1]} {lang.verbs[v]} the {lang.nouns[n2]}."

    def _met(self) -> str:
        """Template 'E met E at P.'."""
        e1 = self.entity()
        e2 = self.entity()
        lang = self.language
        return f"{lang.names[e1]} met {lang.names[e2]} at {lang.places[self.take('place')]}."

    def _with(self) -> str:
        """Template 'E V the N with E.'."""
        e1 = self.entity()
        v, n = self.take("verb"), self.take("noun")
        e2 = self.entity()
        lang = self.language
        return f"{lang.names[e1]} {lang.verbs[v]} the {lang.nouns[n]} with {lang.names[e2]}."


def _draw(cdf: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """Inverse-CDF samples of a categorical distribution given by its cumulative sums."""
    return np.searchsorted(cdf, rng.random(size), side="right").clip(max=len(cdf) - 1)


def _draw_one(cdf: np.ndarray, rng: np.random.Generator) -> int:
    return int(np.searchsorted(cdf, rng.random(), side="right").clip(max=len(cdf) - 1))


def synthetic_documents(
    seed: int, grammar: Grammar = Grammar()
) -> Iterator[tuple[str, str, float]]:
    """Endless stream of (doc_id, text, log_prob_nats) for one seed."""
    language = SyntheticLanguage(grammar)
    rng = np.random.default_rng([seed % 2**63, 1_000_003])  # any int seed, negative ones included
    index = 0
    while True:
        text, logp = language.sample(rng)
        yield f"synthetic-{seed}-{index}", text, logp
        index += 1
