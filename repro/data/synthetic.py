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
        # bulk draws, consumed in order; sized generously for the worst case of each template
        places = _draw(self.cdf_place, rng, 2 * n_sent)
        adjs = _draw(self.cdf_adj, rng, 2 * n_sent)
        verbs = _draw(self.cdf_verb, rng, 2 * n_sent)
        nouns = _draw(self.cdf_noun_by_topic[topic], rng, 3 * n_sent)
        breaks = rng.random(n_sent) < g.paragraph_break_prob
        ip = ia = iv = inn = 0
        used_places, used_adjs, used_verbs, used_nouns = [], [], [], []
        counts: dict[int, int] = {}
        mentions = 0
        used_mass = 0.0
        home: dict[int, int] = {}
        like: dict[int, tuple[int, int]] = {}
        alpha = g.new_entity_alpha
        out: list[str] = []

        def entity() -> int:
            nonlocal mentions, used_mass, logp
            a = alpha if len(counts) < g.n_names else 0.0  # no new entity once every name is used
            u = rng.random() * (mentions + a)
            if u < mentions:  # reuse an existing entity, chosen proportionally to its count
                acc = 0.0
                for e in counts:  # e is used after the loop
                    acc += counts[e]
                    if u < acc:
                        break
                logp += math.log(counts[e] / (mentions + a))
            else:  # a new name, Zipf over the names not yet used
                while True:
                    e = _draw_one(self.cdf_name, rng)
                    if e not in counts:
                        break
                logp += math.log(a / (mentions + a)) + math.log(self.p_name[e] / (1.0 - used_mass))
                used_mass += self.p_name[e]
                counts[e] = 0
            counts[e] += 1
            mentions += 1
            return e

        for s, t in enumerate(templates):
            if t == 0:
                e = entity()
                if e not in home:
                    home[e] = int(places[ip])
                    used_places.append(places[ip])
                    ip += 1
                sent = f"{self.names[e]} lives in {self.places[home[e]]}."
            elif t == 1:
                e = entity()
                if e not in like:
                    like[e] = (int(adjs[ia]), int(nouns[inn]))
                    used_adjs.append(adjs[ia])
                    used_nouns.append(nouns[inn])
                    ia += 1
                    inn += 1
                a, n = like[e]
                sent = f"{self.names[e]} likes the {self.adjectives[a]} {self.nouns[n]}."
            elif t == 2:
                a, n1, v, n2 = adjs[ia], nouns[inn], verbs[iv], nouns[inn + 1]
                used_adjs.append(a)
                used_nouns += [n1, n2]
                used_verbs.append(v)
                ia += 1
                inn += 2
                iv += 1
                sent = (
                    f"The {self.adjectives[a]} {self.nouns[n1]} {self.verbs[v]} "
                    f"the {self.nouns[n2]}."
                )
            elif t == 3:
                e1 = entity()
                e2 = entity()
                used_places.append(places[ip])
                sent = f"{self.names[e1]} met {self.names[e2]} at {self.places[places[ip]]}."
                ip += 1
            else:
                e1 = entity()
                v, n = verbs[iv], nouns[inn]
                iv += 1
                inn += 1
                used_verbs.append(v)
                used_nouns.append(n)
                e2 = entity()
                sent = (
                    f"{self.names[e1]} {self.verbs[v]} the {self.nouns[n]} with {self.names[e2]}."
                )
            out.append(sent)
            if s < n_sent - 1:
                out.append("\n\n" if breaks[s] else " ")
        n_gaps = n_sent - 1
        n_breaks = int(breaks[:n_gaps].sum())
        logp += n_breaks * math.log(g.paragraph_break_prob) + (n_gaps - n_breaks) * math.log(
            1 - g.paragraph_break_prob
        )
        logp += float(
            self.log_p_place[used_places].sum()
            + self.log_p_adj[used_adjs].sum()
            + self.log_p_verb[used_verbs].sum()
        )
        # topic marginalised exactly: log sum_k (1/K) prod_j p_k(noun_j); the 1/K is added above
        per_topic = self.log_p_noun[:, used_nouns].sum(axis=1)
        top = per_topic.max()
        logp += float(top + math.log(np.exp(per_topic - top).sum()))
        return "".join(out), logp


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
