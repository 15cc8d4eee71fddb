{{ config(materialized='table', order_by='tuple()') }}

{#- The as_of this build of the popular board ranks at (var `board_as_of`, default now),
    aligned down to 10 seconds (the bucket of sql/0029). Every model of the board reads it
    from here, and the publisher reads it back from the summary, so the alignment rule is
    applied here only. -#}

select {{ board_as_of(10) }} as as_of
