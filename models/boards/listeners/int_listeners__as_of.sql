{{ config(materialized='table', order_by='tuple()') }}

{#- The as_of this build of the listeners board ranks at (var `board_as_of`, default now),
    to the millisecond. Every model of the board reads it from here, and the publisher
    reads it back from the summary, so the alignment rule is applied here only. -#}

select {{ board_as_of() }} as as_of
