"""plan()'s budgets, held by measurement.

The planner's bytes are the profile's, scaled to the measured store-all
step; a plan is then applied and its step measured by the allocator
(_verify.measure_step). The rules (docs/PYTORCH.md, "Memory by
measurement"):
  - the plan for budget B reports B, and its measured peak is within B:
    while a plan measures over B, it is planned again for B less the excess;
  - the least budget is the measured peak of the plan for the planner's
    least budget (a plan that measured m meets a budget of m; where it
    measured more than 1% over its prediction, the plan for halfway to m
    is measured too, and the lower taken), lowered
    while the planner, given less, finds a plan that measures lower by 1%
    or more (each try is a measured step; a smaller step is kept and ends
    the search; a plan measured over its prediction ends it too); that
    plan is kept with the profile, and every budget at or above the least
    plans (where nothing else fits, that least plan); a plan measured
    lower at any budget (before or after) is the least from then on: a
    refusal never names more than a plan already measured;
  - a budget below the least is refused, naming it (BudgetError);
  - of the plans measured within B (kept with the profile), the one
    predicted fastest is returned: the planner's plan for B can recompute
    more than one made for less (its search is not monotone in cost), and
    a larger budget never gets a slower plan than one already measured.
What is already known is not measured again: each plan's measured peak is
kept with the profile (by its modes), store-all's is the measured store-all
step, and once the least is known, a budget below it is refused and the
least itself gives the least plan without a step (issue 34: plan() < 5 s).
"""
import copy

from .planning import MARGIN, BudgetError, human, plan_graph, store_all

TRIES = 4  # plans for less after a measured excess, per budget
LEAST_STEP = 0.01  # the least search goes on while a measured step lowers it by this share or more: T5's
# least went 81.66 -> 81.36 -> 81.07 -> 80.80 -> 80.54 MB in five measured steps of 1.6 s (12.9 s a refusal)


class Search:
    """One plan() call: the profile, the measured steps, and how a plan is made."""

    def __init__(self, model, args, device, prof, check):
        self.model, self.args, self.device, self.prof, self.check = model, args, device, prof, check
        self.scale, self.full = 1.0, None
        if check:
            if prof.measured_store_all is None:
                from ._verify import store_all_step
                prof.measured_store_all, prof.store_all_ms = store_all_step(model, args, device)
            self.full = prof.measured_store_all
            self.scale = self.full / max(store_all(prof.graph)["store_all_bytes"], 1)

    def make(self, budget, inner=None):
        P = plan_graph(self.prof.graph, budget, scale=self.scale, store_all_bytes=self.full, inner=inner)
        P.model, P.profile, P.table = self.model, self.prof, self.prof.table(P.modes)
        self.predict(P)
        if P.planner == "store-all" and self.full is not None:
            P.measured_peak = self.full
        return P

    def measure(self, P):
        from . import _apply
        from ._verify import measure_step
        from .profile import plan_key
        if P.planner == "store-all" and self.full is not None:
            return self.full
        key = plan_key(P)
        if key not in self.prof.measured:
            self.prof.measured[key], ms = measure_step(_apply.apply(self.model, P), self.args, self.device,
                                                       timed=True)
            self.prof.measured_plans[key] = P
            self.store_all_from(P, ms)
        P.measured_peak = self.prof.measured[key]
        if self.prof.least is not None and P.measured_peak < self.prof.least[0]:
            self.prof.least = (P.measured_peak, P)  # a plan measured below the least known: the least now
        return P.measured_peak

    def store_all_from(self, P, ms):
        """A plan's measured step, less what the prediction adds to the store-all step, is another
        measurement of the store-all step: the store-all time is the least of them. One step's time
        swings by up to 40% here (a store-all step timed at 900 ms where the median is 627: every
        prediction of that plan() was 1.4x the measured step); a step slower than usual, the first
        of an applied model's, does not move the least."""
        if ms is None or self.prof.store_all_ms is None:
            return
        est = ms - self.prof.recompute_ms(P)
        if est > 0:
            self.prof.store_all_ms = min(self.prof.store_all_ms, est)

    def predict(self, P):
        """P's prediction from the store-all time as now known (store_all_from may lower it)."""
        P.store_all_ms = self.prof.store_all_ms
        P.predicted_step_ms = None if P.store_all_ms is None else P.store_all_ms + self.prof.recompute_ms(P)
        return P

    def predicted(self, F):
        """A copy of F, predicted again (the plan returned: measured steps since it was made count)."""
        return self.predict(copy.copy(F))

    def fastest(self, want, F):
        """F, or a plan measured earlier within `want` that is predicted faster (the least time the
        planner's schedule recomputes; F wins ties)."""
        best, cost = F, self.prof.recompute_ms(F)
        for Q in self.prof.measured_plans.values():
            if Q.measured_peak is not None and Q.measured_peak <= want and self.prof.recompute_ms(Q) < cost:
                best, cost = Q, self.prof.recompute_ms(Q)
        return best

    def fitting(self, want, P=None, inner=None):
        """A plan for `want` whose measured peak is within it, or None: P (or the plan for want) measured,
        and planned again for less (the excess taken off) while it is over."""
        for _ in range(TRIES + 1):
            if P is None:
                try:
                    P = self.make(want, inner=inner)
                except BudgetError:
                    return None
            m = self.measure(P)
            if m <= want:
                return P
            inner = int((inner if inner is not None else P.planner_budget * self.scale) - (m - want))
            P = None
            if inner <= 0:
                break
        return None

    def plan(self, want):
        """The plan for budget `want`, its budget_bytes want; BudgetError naming the least when none."""
        if not self.check:
            return self.make(want)
        if self.prof.least is not None and want <= self.prof.least[0]:
            # known without a step: below the least is refused, at it the least plan is the plan
            least, LP = self.prof.least
            if want < least:
                raise self.refusal(want, least)
            F = self.predicted(LP)
            F.budget_bytes, F.least_bytes = want, least
            return F
        try:
            P = self.make(want)
        except BudgetError:
            P = None
        F = self.fitting(want, P) if P is not None else None
        if F is None:
            least, LP = self.least()
            if least > want:
                raise self.refusal(want, least)
            F = LP
        F = self.predicted(self.fastest(want, F))
        F.budget_bytes = want
        F.least_bytes = self.least()[0] if self.prof.least is not None else F.least_bytes
        return F

    def least(self):
        """(the least budget, its plan), kept with the profile: the plan for the planner's least budget,
        measured (a plan that measured m meets a budget of m), then the plan for the lowest measured
        peak so far, while that measures lower still (the model's bytes above the allocator's: the
        planner, given that budget, recomputes less and still fits)."""
        if self.prof.least is not None:
            return self.prof.least
        start = min(int(store_all(self.prof.graph)["min_budget_bytes"] * self.scale / (1 - MARGIN)) + 1, self.full)
        best = None
        try:
            P = self.make(start)
            if P.planner != "store-all":
                self.measure(P)
                best = P
        except BudgetError:
            pass
        if best is not None and best.measured_peak > best.peak_bytes * (1 + LEAST_STEP):
            # measured over its prediction by more than a step (GPT-NeoX: 3.7%, a plan whose memory the
            # model underestimates): the plan for a budget halfway to that peak is another plan, and
            # where it holds its prediction it measures lower
            try:
                Q = self.make((start + best.measured_peak) // 2)
                if Q.planner != "store-all" and self.measure(Q) < best.measured_peak:
                    best = Q
            except BudgetError:
                pass
        for _ in range(TRIES):
            if best is None or best.measured_peak > best.peak_bytes:
                # measured over its prediction: a plan for its measured peak is one for ~MARGIN less of
                # the model's bytes, a step lower by less than that (T5: 0.37% for 1.6 s)
                break
            try:
                Q = self.make(best.measured_peak)
            except BudgetError:
                break
            if Q.planner == "store-all" or self.measure(Q) >= best.measured_peak:
                break
            gain, best = best.measured_peak - Q.measured_peak, Q
            if gain < LEAST_STEP * best.measured_peak:
                break  # lowered by less than 1%: not worth another measured step
        for Q in self.prof.measured_plans.values():  # one measured earlier (another budget) may be lower
            if Q.planner != "store-all" and (best is None or Q.measured_peak < best.measured_peak):
                best = Q
        if best is None or best.measured_peak >= self.full:
            self.prof.least = (self.full, self.make(self.full))
        else:
            self.prof.least = (best.measured_peak, best)
        return self.prof.least

    def refusal(self, want, least):
        note = self.prof.checkpoint_note()
        return BudgetError("rematplan: budget %s (%d bytes) cannot be met: the least budget that works is %s "
                           "(%d bytes, its plan measured; store-all %s); raise the budget to at least %d bytes%s"
                           % (human(want), want, human(least), least, human(self.full), least,
                              "; " + note if note else ""), least, self.full, want)
