"""HTML reports and timelines: single self-contained files, plotly.js embedded once.

Modules, in the order data flows:
    summary   per-variant figures from an Analysis (ms per step, overlap %, breakdowns)
    timeline  the timeline's lanes and intervals (and the overlap/exposed lanes), and its
              level-of-detail view
    style     colours, labels and hover text shared by the figures and the page script
    figures   plotly figures (pure; return go.Figure)
    plots     the public figure API: figures of an Analysis, for notebooks and the report
    lod       a timeline's intervals packed for the page script that redraws it on zoom
    manifest  the run's manifest.json and timing.json records (optional)
    sections  what a report or timeline page shows, as data for the templates
    html      rendering with Jinja2 (autoescaped) and the only file writes
"""
