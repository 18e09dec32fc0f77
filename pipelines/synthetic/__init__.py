"""Generated media for demos and tests, so that nothing is ever downloaded: the demo clip
(``demo``), the harder clip (``hard``), their ground truth (``truth``), photographs at any
size (``photos``) and tiny moving-rectangle clips (``rectangles``), all encoded by ``encode``."""
