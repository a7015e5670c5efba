"""How it works: the idea in one page, with the marks the app uses."""

import streamlit as st

from specviz import figures as F
from specviz import ui

ui.page_chrome()
ui.sidebar_pair(divider=False)
st.markdown("## How speculative decoding works")
left, right = st.columns([3, 2], gap="large")
with left:
    st.markdown(
        """
A large **target** model writes one token per forward pass, and each pass costs about the same
whether it reads one new token or several. Speculative decoding spends that slack:

1. **Draft.** A small, fast **draft** model guesses the next γ tokens, one cheap pass each.
2. **Verify.** The target checks all γ guesses in **one** forward pass.
3. **Accept.** Guesses are kept up to the first one the target disagrees with. The target's own
   token replaces it (a **fix**); if every guess survives, the same pass yields one **bonus** token.

With greedy decoding the output is exactly the target's own; with sampling, the acceptance rule
(accept with probability min(1, p/q), else resample from the leftover) keeps the target's exact
distribution. Either way each round costs γ draft passes plus one target pass, and wins between 1
and γ+1 tokens.
"""
    )
    st.markdown("#### The serial wait")
    st.markdown(
        """
Drafting and verifying run strictly one after the other: **the target sits idle while the draft
guesses, and the draft sits idle while the target checks.** The timeline on the Live page draws
that waiting as hatched bars, and the idle share of each model sits beside it. That wait is the
ceiling on what plain speculative decoding can gain, and it is what newer methods attack by
overlapping the two: PEARL pre-verifies while drafting, and speculative speculative decoding
(Saguaro) pre-drafts a continuation for each likely verification outcome.
"""
    )
    st.markdown("#### At the projector")
    keys = ui.SHORTCUTS
    st.markdown(
        f"""
- **{keys['run']}** Run · **{keys['step']}** Step · **{keys['autoplay']}** Autoplay · **{keys['stop']}** Stop
  (shortcuts work whenever the cursor is not in a text box)
- Step and Autoplay replay each round in slow motion *after* it ran at full speed, and say so;
  every time shown is the engine's real time.
- The theme (light or dark) follows your system; change it in the ⋮ menu, top right.
"""
    )
with right:
    st.markdown("#### The marks")
    st.html(F.legend_html())
    st.markdown("#### The numbers")
    st.markdown(
        """
- **acceptance rate**: accepted ÷ drafted tokens
- **tokens / round** (mean acceptance length): 1 + accepted ÷ rounds
- **cost ratio c**: draft pass time ÷ target pass time

Let α be the per-token acceptance probability: the chance that one draft token survives. It is
not the acceptance rate (a round stops at its first rejection, so the app infers α from
tokens / round). A round then yields on average
"""
    )
    st.latex(r"\frac{1-\alpha^{\gamma+1}}{1-\alpha}\ \text{tokens,}")
    st.markdown("and the expected speedup over the target alone is")
    st.latex(r"\frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}")
    st.markdown("Speculation can only pay off when α > c; the best γ is the whole number that maximises "
                "the speedup.")
