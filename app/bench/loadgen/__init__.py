"""``vidpipe bench --loadgen``: vidpipe's detector measured with MLPerf Inference's LoadGen
(``mlcommons-loadgen``), the harness the industry's inference results come from — its four
scenarios (SingleStream, MultiStream, Server, Offline), its validity checks and its
summaries — with the hand-written loop beside it as a second system under test.

``library``: the query sample library (a clip's decoded frames, held in memory);
``systems``: the two systems under test; ``harness``: one scenario run under LoadGen's
settings (``user.conf`` here, MLPerf's own defaults under it); ``bench``: the command.
"""
