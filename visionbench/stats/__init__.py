"""The statistics of the benchmark, on plain numbers: no results files, no torch, no plots.

    >>> from visionbench.stats import significance, metrics
    >>> significance.compare(acts_values, relu_values, "student")   # t-test against the baseline
    >>> metrics.higher_is_better("epochs_to_90")                     # False: fewer epochs win

The sweep (`seeds=auto`) and the report both stand on this package; it imports nothing of
visionbench outside itself. Modules:

* `metrics`: what a metric's name says — the one `higher_is_better`, and curve metric names
  (`epochs_to_<X>`, `<column>_auc`) parsed.
* `significance`: the two-sample test against a baseline (Student, Welch, paired), Holm, Cohen's d,
  the bootstrap CI of a difference of means, significance stars and the marks of untested rows.
* `power`: minimal detectable effect, seeds needed, the TOST equivalence p (statsmodels).
* `sequential`: the group-sequential rule of `seeds=auto` (O'Brien–Fleming-type α spending).
* `improvement`: the probability of improvement P(X > Y) with stratified-bootstrap CIs (Agarwal et al. 2021).
* `reproduction`: did a rerun reproduce a result (`visionbench compare`: the verdict identical / reproduced /
  differs / undecided, Holm over every test, seeds needed) and the prediction interval of one run.
* `equivalence`: the tests compare decides with, each holding its level whatever B's spread: equivalence in the
  reference's seed sd (exact; its design rates), the spread check, Welch and the TOST with Hsu's df, the lattice of ties.
* `convergence`: the stall rule of a run (a training loss that never came down from a guess over C classes, or a
  best top-1 at chance), the slope of a curve's last epochs with its t interval over seeds and the seed sd it must
  beat, the pairs whose order reversed between two epochs with the Welch test of their gains (Holm).
* `ranking`: mean ranks across tasks, the Friedman test, the Nemenyi critical difference and its cliques
  (Demšar 2006).
* `noise`: the variance components of a noise design (init, data order, augmentation, the test set) with their
  χ² intervals, the check of their sum, the one-sided variance-ratio (F) test of "less stable".

Import the module you need (`from visionbench.stats import power`); this file imports none of them,
so asking for one does not load scipy's or statsmodels' whole stack for the others.
"""
